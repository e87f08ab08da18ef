# syncd container image.
#
#   docker build -t syncd .                                  # embedded store
#   docker build -t syncd --build-arg EXTRAS=fast,postgres . # + cluster mode
#   docker run -p 3000:3000 -v syncd-data:/data \
#     -e SERVICE_SIGNING_KEY="$(docker run --rm syncd keygen)" -e SERVICE_ADMIN_TOKEN=change-me syncd
#
# State lives in the /data volume (log segments, snapshots, admin_token), so
# the container can be replaced without losing anything; run one container per
# volume (the store takes a lock on it). See docs/operations.md.
FROM python:3.11-slim

ARG EXTRAS=fast

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed uid/gid, so a bind-mounted data directory can be chowned to match.
RUN groupadd --system --gid 10001 syncd \
    && useradd --system --uid 10001 --gid syncd --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin syncd

WORKDIR /build
COPY pyproject.toml README.md ./
COPY syncd ./syncd
RUN pip install ".[${EXTRAS}]" \
    && cd / && rm -rf /build \
    && mkdir -p /data && chown syncd:syncd /data && chmod 0700 /data

WORKDIR /data
ENV SERVICE_BIND=0.0.0.0:3000 \
    SERVICE_DATA_DIR=/data
VOLUME ["/data"]
EXPOSE 3000
USER syncd

# syncd health asks /health/ready where SERVICE_BIND listens (0.0.0.0 and [::],
# dual-stack, on 127.0.0.1, any other address as it is), over https when
# SERVICE_TLS_CERT is set; exit 0 when ready or draining (a graceful stop
# under way is no unhealthy container), 1 otherwise.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["syncd", "health"]

# SIGTERM (docker stop) ends syncd gracefully with exit code 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["syncd"]
CMD ["serve"]
