"""The dashboard's errors::

    PocketMQError               (pocketmq.common.errors)
     └── DashboardError
          ├── HttpError         answered as ``{"error": message}`` with its HTTP status
          │                     (dashboard/http.py)
          └── ScrapeError       a broker's /metrics did not answer, or not in the text
                                format (dashboard/scrape.py)

Errors of the client SDK the dashboard calls (``ClientError``) are answered by the API
handlers with the status they stand for.
"""

from __future__ import annotations

from pocketmq.common.errors import PocketMQError

__all__ = ["DashboardError"]


class DashboardError(PocketMQError):
    """Base of the errors the dashboard raises on purpose."""
