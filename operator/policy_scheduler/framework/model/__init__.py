"""The parsed cluster objects the cluster state holds and plugins read: the NodeTable and PodInfo,
label and node selectors, quantities, taints and resource helpers (upstream's
framework types.go NodeInfo and PodInfo, and the API helpers they parse with)."""
