"""PySpark data source for mpbroker: `spark.read / readStream / write / writeStream`
with `format("mpbroker")`, on PySpark 4's Python Data Source API and confluent-kafka.

    import mpbroker.spark
    mpbroker.spark.register(spark)
    df = (spark.read.format("mpbroker")
          .option("bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "pageviews")
          .load())

Options and columns follow Spark's own Kafka connector (`mpbroker.spark.options`);
the short name is `mpbroker` because Spark reserves `kafka`. The reader is in
`mpbroker.spark.source`, the sink and its exactly-once mechanisms in
`mpbroker.spark.sink`, the Kafka client code in `mpbroker.spark.client`. `register`
imports them: pyspark is an optional dependency, and `import mpbroker.spark` does not
need it.
"""
from __future__ import annotations

SHORT_NAME = "mpbroker"


def register(spark) -> None:
    """Make `format("mpbroker")` available in this SparkSession."""
    from mpbroker.spark.source import MpbrokerDataSource

    spark.dataSource.register(MpbrokerDataSource)


__all__ = ["SHORT_NAME", "register"]
