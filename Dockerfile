# policy-scheduler: `docker build -t policy-scheduler:0.1.0 .`, then `kubectl apply -f crds/ -f manifests/`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The package and its runtime dependencies only (no test extras); the source tree is not kept.
COPY . /src
RUN pip install /src && rm -rf /src

# A fixed numeric id, so that the kubelet can verify runAsNonRoot (manifests/04-deployment.yaml).
RUN groupadd --system --gid 10001 policy-scheduler \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin policy-scheduler
USER 10001:10001

# /healthz and /metrics
EXPOSE 8080 8081 9443
ENTRYPOINT ["policy-scheduler"]
CMD ["run"]
