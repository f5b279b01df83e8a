# nnhal driver image: the NN HAL CPU device behind gRPC on port 50051.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1

RUN useradd --create-home --uid 10001 nnhal
WORKDIR /opt/nnhal
COPY pyproject.toml README.md ./
COPY nnhal ./nnhal
RUN pip install --no-cache-dir .

USER nnhal
EXPOSE 50051
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
  CMD ["python", "-m", "nnhal.tools.healthcheck", "127.0.0.1:50051"]
# Inside the container the server must listen on all interfaces to be published.
CMD ["nnhal", "serve", "--listen", "0.0.0.0:50051"]
