# One image for every process (web, migrate, cpu worker, gpu worker): see docker-compose.yml
# and docs/OPERATIONS.md ("Containers"). Everything the site needs at run time is in the
# image (the engine's weights, the grader's sentence model, static files): no network.
#
#   CPU image (default):  docker compose build
#   GPU worker image:     docker compose --profile gpu build gpu-worker
#                         (TORCH_INDEX_URL points at a CUDA build of the same torch)
FROM python:3.11-slim-bookworm

ARG TORCH_VERSION=2.13.0
# CPU wheels by default: PyPI's Linux torch is a multi-GB CUDA build. The GPU worker passes
# a CUDA index here (e.g. https://download.pytorch.org/whl/cu128).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    PYTHONPATH=/app \
    VAR_DIR=/app/var \
    XDG_CACHE_HOME=/app/var/cache \
    HF_HOME=/app/var/cache/huggingface \
    STATIC_ROOT=/app/staticfiles

WORKDIR /app

# torch first, from the chosen index, so nothing below pulls another build of it.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"

# The project's dependencies (a layer of their own: rebuilt only when pyproject.toml changes).
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt "torch==${TORCH_VERSION}" \
    && rm /tmp/requirements.txt

COPY . .

# Static files are collected at build time (WhiteNoise serves them from STATIC_ROOT); the
# throwaway key and host only let settings load in production mode here.
RUN DEBUG=0 SECRET_KEY=build-only-not-a-secret ALLOWED_HOSTS=build.invalid \
    python -m manage collectstatic --noinput -v 0 \
    && useradd --system --uid 10001 --home-dir /app trainer \
    && mkdir -p /app/var && chown trainer /app/var

USER trainer
EXPOSE 8000
# The web process; the compose file gives the workers and the migrate job their own commands.
# (uvicorn via trainer/web.py: proxy headers only from FORWARDED_ALLOW_IPS, none by default.)
CMD ["python", "-m", "trainer.web", "--host", "0.0.0.0", "--port", "8000", "--workers", "2"]
