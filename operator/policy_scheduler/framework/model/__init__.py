"""The parsed cluster objects the cluster state holds and plugins read: the NodeTable (and its
NodeTree order, nodetree.py) and PodInfo, label and node selectors, quantities, taints and resource
helpers (upstream's framework types.go NodeInfo and PodInfo, and the API helpers they parse with).
The objects of a plugin family (volumes, DRA, pod groups) live in its folder under plugins/."""
