# The Pheby server image: `pheby serve` on port 8620, data dir /data (mount a volume there).
#   docker build -t pheby-server .
#   docker run -p 8620:8620 -v pheby-data:/data -e HERMES_URL=... -e HERMES_API_KEY=... \
#     -e PHEBY_SECRET=... pheby-server
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PHEBY_DATA_DIR=/data

# A fixed uid/gid, so volumes (and the EFS access point in template.yaml) can be owned by it.
RUN groupadd --system --gid 10001 pheby \
    && useradd --system --uid 10001 --gid pheby --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin pheby \
    && mkdir -p /data \
    && chown pheby:pheby /data

WORKDIR /src
# The runtime dependencies only (no dev extra); the source tree is not kept in the image.
COPY pyproject.toml README.md ./
COPY pheby_main.py ./
COPY pheby ./pheby
COPY handlers ./handlers
COPY storage ./storage
COPY scheduler ./scheduler
COPY hermes_client ./hermes_client
COPY demo_hermes ./demo_hermes
COPY hermes_plugin ./hermes_plugin
COPY web ./web
RUN pip install . && rm -rf /src

WORKDIR /data
USER pheby
VOLUME ["/data"]
EXPOSE 8620

# slim images have no curl: ask /healthz with the standard library.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8620/healthz', timeout=4)"]

# SIGTERM (docker stop, ECS) cancels active runs, closes WebSockets with 1012 and exits 0.
STOPSIGNAL SIGTERM
CMD ["pheby", "serve", "--host", "0.0.0.0", "--port", "8620", "--data-dir", "/data"]
