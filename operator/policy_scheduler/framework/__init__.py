"""The pure scheduling core: no kopf, no Kubernetes client, no I/O."""
