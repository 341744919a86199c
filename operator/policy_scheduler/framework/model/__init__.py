"""The parsed cluster objects the cluster state holds and plugins read: the NodeTable (and its
NodeTree order, nodetree.py) and PodInfo, label and node selectors, quantities, taints, volumes,
pod groups and resource helpers (upstream's framework types.go NodeInfo and PodInfo, and the API
helpers they parse with)."""
