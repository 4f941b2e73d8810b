# Base image for users who can pull from a registry: `docker build --build-arg BASE=python:3.11-slim
# -f docker/base.Dockerfile -t swefleet-base:py311 docker/` and set tasks.base_image to that tag.
# Without a registry use `swefleet images build-base` (Debian packages -> docker import).
ARG BASE=python:3.11-slim
FROM ${BASE}
# Builds that reach PyPI through a TLS-intercepting proxy: pass the host CA bundle as a build
# secret (`--secret id=ca,src=/etc/ssl/certs/ca-certificates.crt`).
RUN --mount=type=secret,id=ca,required=false \
    apt-get update -qq && apt-get install -y -qq --no-install-recommends git patch procps \
    && rm -rf /var/lib/apt/lists/* \
    && if [ -f /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi \
    && python3 -m pip install --no-cache-dir pytest \
    && useradd -m -u 1000 -s /bin/bash agent && mkdir -p /testbed
ENV LANG=C.UTF-8
CMD ["/bin/bash"]
