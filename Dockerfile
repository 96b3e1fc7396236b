FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY crawler_tasks ./crawler_tasks
COPY config ./config
# /data is the output volume: created here, owned by the user the workers run as (a named
# volume starts as a copy of it, ownership included).
RUN pip install --no-cache-dir '.[ops,s3]' \
    && useradd --create-home crawler \
    && mkdir -p /data \
    && chown crawler:crawler /data
USER crawler
ENV CRAWLER_OUTPUT_DIR=/data \
    CRAWLER_SCHEDULES_FILE=/app/config/schedules.toml
VOLUME /data
