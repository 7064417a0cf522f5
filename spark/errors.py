"""The Spark connector's errors::

    PocketMQError                    (pocketmq.common.errors)
     ├── ConfigError
     │    └── OptionError            a source or sink option is missing, unknown or malformed;
     │                               the message names the option as documented (camelCase)
     └── SparkConnectorError
          ├── ColumnError            the DataFrame given to the sink lacks a column or has it
          │                          with a type the sink cannot send
          └── DataLossError          offsets the query needs are gone (retention, a truncated
                                     queue, a deleted segment) and failOnDataLoss is true

Spark shows them inside its own exceptions: ``AnalysisException
[PYTHON_DATA_SOURCE_ERROR]`` when raised while planning, ``PythonException``
from a task, ``StreamingQueryException`` from a running query.
"""

from __future__ import annotations

from pocketmq.common.errors import ConfigError, PocketMQError

__all__ = ["ColumnError", "DataLossError", "OptionError", "SparkConnectorError"]


class OptionError(ConfigError):
    """A data source option is wrong; the message names it."""


class SparkConnectorError(PocketMQError):
    """Base of the connector's errors other than options."""


class ColumnError(SparkConnectorError):
    """The sink's input DataFrame lacks a column or has one of the wrong type."""


class DataLossError(SparkConnectorError):
    """Offsets a query needs are no longer stored (see the ``failOnDataLoss`` option)."""
