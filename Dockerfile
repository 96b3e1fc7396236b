FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY crawler_tasks ./crawler_tasks
COPY config ./config
RUN pip install --no-cache-dir '.[ops]' && useradd --create-home crawler
USER crawler
ENV CRAWLER_OUTPUT_DIR=/data
