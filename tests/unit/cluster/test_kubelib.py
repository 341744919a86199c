"""cluster/kubelib.py: credentials.py imports the kubernetes library's loaders without the rest of
it (start-up time), and every later use of the library still gets all of it. Each case in a fresh
interpreter (the import state is what is tested)."""

from __future__ import annotations

import subprocess
import sys


def run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_the_loaders_come_without_the_rest_of_the_library_and_the_rest_comes_when_asked():
    got = run("""
import sys
from policy_scheduler.cluster import credentials
print(credentials.KubeConfigLoader.__module__)
print('pydantic' in sys.modules, 'kubernetes.watch' in sys.modules, 'kubernetes.client.api_client' in sys.modules)
import kubernetes
from kubernetes import client, config, watch
print(kubernetes.__version__ == __import__('importlib.metadata').metadata.version('kubernetes'))
print(client.ApiClient.__module__, client.Configuration is credentials.Configuration)
print(watch.Watch.__module__, client.CoreV1Api.__module__, 'kubernetes.dynamic' in sys.modules)
api = config.new_client_from_config_dict({
    'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'c',
    'clusters': [{'name': 'c', 'cluster': {'server': 'https://127.0.0.1:1'}}],
    'users': [{'name': 'u', 'user': {'token': 't'}}],
    'contexts': [{'name': 'c', 'context': {'cluster': 'c', 'user': 'u'}}]})
print(type(api).__module__, isinstance(api, client.ApiClient))
""")
    assert got == ["kubernetes.config.kube_config",
                   "False", "False", "False",  # none of it imported for the credentials
                   "True",
                   "kubernetes.client.api_client", "True",  # the real ApiClient, one Configuration
                   "kubernetes.watch.watch", "kubernetes.client.api.core_v1_api", "True",
                   "kubernetes.client.api_client", "True"]  # kube_config's stand-in makes a real one


def test_nothing_is_done_when_the_library_was_imported_first():
    got = run("""
import kubernetes
from policy_scheduler.cluster import kubelib, credentials
print(kubelib.install(), credentials.Configuration is kubernetes.client.Configuration)
print(kubernetes.client.ApiClient.__module__)
""")
    assert got == ["False", "True", "kubernetes.client.api_client"]


def test_the_oidc_refresh_modules_come_when_used_and_the_real_ones_for_everyone_else():
    got = run("""
import sys
from policy_scheduler.cluster import credentials
from kubernetes.config import kube_config as k
print([m for m in sys.modules if m.split('.')[0] in ('oauthlib', 'requests_oauthlib', 'requests')])
import oauthlib.oauth2, requests_oauthlib  # another importer: the real modules
print(type(sys.modules['oauthlib']).__name__, hasattr(requests_oauthlib, '__file__'), hasattr(oauthlib, '__file__'))
# kube_config's names: what it reaches when refreshing an OIDC token
e = k.oauthlib.oauth2.rfc6749.errors.InvalidClientIdError
print(e is oauthlib.oauth2.rfc6749.errors.InvalidClientIdError)
s = k.OAuth2Session(client_id='c')
print(type(s) is requests_oauthlib.OAuth2Session)
""")
    assert got == ["[]", "module", "True", "True", "True", "True"]


def test_oidc_modules_imported_first_are_used_as_they_are():
    got = run("""
import requests_oauthlib, oauthlib.oauth2
from policy_scheduler.cluster import credentials
from kubernetes.config import kube_config as k
print(k.OAuth2Session is requests_oauthlib.OAuth2Session, k.oauthlib is oauthlib)
""")
    assert got == ["True", "True"]
