# nnhal driver image: the NN HAL behind gRPC on $NNHAL_PORT (default 50051), able to serve
# every device kind (cpu, ort, litert); the CMD serves the reference cpu device.
#
#   docker build -t nnhal:0.1.0 .
#   docker run -p 50051:50051 -v nnhal-state:/var/lib/nnhal nnhal:0.1.0
#   docker run -p 50051:50051 -v nnhal-state:/var/lib/nnhal -e NNHAL_DEVICE=cpu,ort,litert nnhal:0.1.0
#
# Pinned to a patch release and a Debian release so a rebuild gets the same Python
# and libc; bump both deliberately (pin a digest too for byte-for-byte rebuilds).
FROM python:3.11.14-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed uid/gid (10001) so Kubernetes' runAsUser/fsGroup (deploy/kubernetes) match the image.
RUN groupadd --gid 10001 nnhal && useradd --create-home --uid 10001 --gid 10001 nnhal
WORKDIR /opt/nnhal
COPY pyproject.toml README.md ./
COPY nnhal ./nnhal
# One extra per device kind beyond the reference cpu device, so the image serves them all:
# ort (`--device ort`, ONNX Runtime) and litert (`--device litert`, LiteRT).
RUN pip install --no-cache-dir ".[ort,litert]"
# The public conformance vectors (with their NOTICE), for `nnhal conformance` in the image:
# deploy/kubernetes/conformance-matrix runs them from /opt/nnhal/conformance/vectors.
COPY conformance ./conformance

# The cache secret seals compilation caches; it lives on a volume so that caches
# survive recreating the container (in the writable layer it would be lost and
# every client's caches would fail authentication). The server creates it, 0600,
# on first start when the volume is empty; Kubernetes mounts it from a Secret.
RUN install -d -o 10001 -g 10001 -m 0700 /var/lib/nnhal
VOLUME /var/lib/nnhal

# One variable sets the port for CMD and HEALTHCHECK alike (EXPOSE documents the default).
ENV NNHAL_PORT=50051
EXPOSE 50051

USER 10001:10001
# With TLS (NNHAL_SERVE_TLS_CERT/_KEY/_CLIENT_CA), also set NNHAL_HEALTH_LISTEN=127.0.0.1:8081:
# the server then serves grpc.health.v1 alone, in plaintext, on loopback, and the probe
# below uses it (no client certificate needed inside the container).
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD ["python", "-m", "nnhal.tools.healthcheck"]
# sh expands $NNHAL_PORT, then `exec` replaces sh with nnhal, which becomes PID 1 and
# receives SIGTERM from `docker stop` itself (a shell in between would swallow it and
# the server would be killed after the stop timeout instead of draining).
# --listen 0.0.0.0: inside the container the server must listen on all interfaces to be published.
# --shm-dir none: same-host shared memory needs the client in this container's IPC and
#   /dev/shm namespace; clients of a published port are remote, so pools travel inline.
CMD ["sh", "-c", "exec nnhal serve --listen \"0.0.0.0:${NNHAL_PORT}\" --shm-dir none --cache-secret-file /var/lib/nnhal/cache-secret"]
