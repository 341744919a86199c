# policy-scheduler: `make image` (docker, podman or buildah) builds policy-scheduler:0.1.0, then
# `kubectl apply -f crds/ -f manifests/`.
#
# The base image is pinned by the digest of its multi-platform index, so the build is repeatable
# and the same line serves linux/amd64 and linux/arm64 (the lock's hashes cover both).
# python:3.11-slim = Python 3.11.16 on Debian 13 (trixie), image built 2026-09-01. The digest was
# taken on 2026-11-27 from docker-library/repo-info (the official images' record of every tag),
# repos/python/remote/3.11-slim.md at commit cc54a6ea2f4e, the newest record of that tag found
# then; it was not pulled then (Docker Hub out of reach), so a first build also checks it.
# To update it: `docker buildx imagetools inspect python:3.11-slim` (or `crane digest
# python:3.11-slim`, `skopeo inspect docker://python:3.11-slim`), or that file's newest version;
# keep the minor version that `make lock` pins for (3.11), and say here when and where.
ARG PYTHON_IMAGE=docker.io/library/python:3.11-slim@sha256:9534e5a8e315485d4061ed659af0fd78a284c015f9b73661b41d6bab25604534

# ---------------------------------------------------------------- deps: a venv from the lock
FROM ${PYTHON_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# The runtime dependencies, every file hash-checked (requirements/runtime.txt), wheels only (the
# slim image has no compiler). The locked pip does the install; the venv itself gets no pip.
COPY requirements/pip.txt requirements/runtime.txt /tmp/lock/
RUN pip install --require-hashes --only-binary=:all: -r /tmp/lock/pip.txt \
 && python -m venv --without-pip /opt/venv \
 && pip --python /opt/venv/bin/python install --require-hashes --only-binary=:all: \
        -r /tmp/lock/runtime.txt

# ---------------------------------------------------------------- wheel: the package
# Built with the base image's own setuptools and wheel (fixed by the digest above): no download.
FROM deps AS wheel
COPY pyproject.toml README.md /src/
COPY operator /src/operator
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/dist /src

# ---------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE}

# Nothing is written to the image at run time (manifests/04-deployment.yaml sets
# readOnlyRootFilesystem): the bytecode is compiled at install, no cache directories, HOME is
# /nonexistent. The one writer is tempfile, under /tmp, which the Deployment mounts as an emptyDir:
# the webhooks' serving certificate, and the kubernetes client's copies of a kubeconfig's client
# certificate (in-cluster, with a service account and no webhooks, nothing at all is written).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PATH=/opt/venv/bin:$PATH

# A fixed numeric id, so that the kubelet can verify runAsNonRoot (manifests/04-deployment.yaml).
RUN groupadd --system --gid 10001 policy-scheduler \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin policy-scheduler

# The dependencies in a layer of their own, which a change of the source leaves as it is; then the
# package, without dependencies and offline. All owned by root, read-only to the user that runs it.
COPY --from=deps /opt/venv /opt/venv
COPY --from=wheel /tmp/dist/ /tmp/dist/
RUN pip --python /opt/venv/bin/python install --no-deps --no-index /tmp/dist/*.whl \
 && rm -rf /tmp/dist

USER 10001:10001
WORKDIR /
# /healthz, /metrics and the admission webhooks
EXPOSE 8080 8081 9443
ENTRYPOINT ["policy-scheduler"]
CMD ["run"]
