# syntax=docker/dockerfile:1
# The PocketMQ image: `pocketmq` is the entrypoint, docker-compose.yml gives each
# service its sub-command (nameserver, broker, send, consume, ...).
#
#   docker build -t pocketmq .
#   docker run --rm -p 9876:9876 pocketmq nameserver --host 0.0.0.0

# -- build: wheels, with the store's C accelerator compiled ------------------------------
FROM python:3.12-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# -- run ------------------------------------------------------------------------------------
FROM python:3.12-slim
RUN useradd --system --uid 10001 --home-dir /data --no-create-home pocketmq \
 && mkdir -p /data && chown pocketmq /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER pocketmq
WORKDIR /data
# /data holds a broker's commit log, queues, index and config; the nameserver keeps
# nothing. No VOLUME here: it would give every container (nameservers, clients) an
# anonymous volume; brokers mount one (`-v broker-a-data:/data`, docker-compose.yml).
# nameserver, broker (gRPC), RocketMQ 5 clients, the dashboard
EXPOSE 9876 10911 8081 8080
ENTRYPOINT ["pocketmq"]
CMD ["--help"]
