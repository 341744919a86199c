//go:build tools

// Package tools pins the helm command that hack/ensure-helm.sh builds.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
