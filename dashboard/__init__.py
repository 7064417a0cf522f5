"""PocketMQ's web dashboard (``pocketmq dashboard``): the cluster, topics, consumer groups,
messages and traces in a browser, on the SDK's AdminClient and the servers' figures.

:class:`Dashboard` serves the pages (``static/``, plain HTML/JS/CSS shipped in the
package) and the JSON API under ``/api/`` they call (:mod:`.api`); :mod:`.history`
samples the charts' figures, one hour in memory.
"""

from pocketmq.dashboard.app import Dashboard, DashboardConfig

__all__ = ["Dashboard", "DashboardConfig"]
