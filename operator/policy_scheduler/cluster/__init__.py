"""The operator's I/O: the only code that talks to the API server. The engine (engine.py: the
informers' router and the scheduling loop, with binding_tasks.py and preemptor.py), the API client
(kubeclient.py, credentials.py; kubelib.py and aiohttp_import.py keep their imports light for the
start-up) and the informers (informer.py, sync.py, objdecode.py); every scheduling write
(apicalls.py), events (recorder.py), policy and PodGroup status, the policies'
revisions (revisions.py) and staged rollouts (rollout_controller.py); leader election (leader.py)
and the health probes' view (engine_health.py); the tuner (tuner.py); the admission webhooks
(admission.py, webhook_server.py, webhook_configs.py, certs.py) and the CRD check (crdcheck.py);
the MultiKueue cluster chooser (multikueue.py, multikueue_workers.py, kubeconfig_guard.py); the
metrics (telemetry.py, telemetry_collectors.py). The cluster state they feed is cache/'s."""

from .aiohttp_import import import_aiohttp

import_aiohttp()  # before any module here imports aiohttp: its import-time CA loading off the start-up path
