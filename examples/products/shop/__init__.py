"""The example's own code: an extraction hook and the Celery task that stores its items."""
