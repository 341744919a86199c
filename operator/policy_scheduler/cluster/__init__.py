"""The only code that talks to the API server: client, caches fed by watch events, binding tasks,
event recorder, policy status writer."""
