"""Webhooks: after every accepted op, POST a small signed JSON event to one URL.

The app builds one ``WebhookDispatcher`` when ``SERVICE_WEBHOOK_URL`` is set
(``validate_url`` checks the value at start), calls ``start()`` once the loop
runs, ``enqueue({...})`` after each durable op and ``await close(t)`` at
shutdown.
"""

from syncd.webhooks.client import WebhookClientError, post, validate_url
from syncd.webhooks.dispatcher import (
    QUEUE_SIZE,
    RETRY_DELAYS,
    SIGNATURE_HEADER,
    WEBHOOK_WORKERS,
    WebhookDispatcher,
    sign,
)

__all__ = [
    "QUEUE_SIZE",
    "RETRY_DELAYS",
    "SIGNATURE_HEADER",
    "WEBHOOK_WORKERS",
    "WebhookClientError",
    "WebhookDispatcher",
    "post",
    "sign",
    "validate_url",
]
