"""Kafka's wire protocol (Kafka's org.apache.kafka.common.protocol): message codecs.

``specs/*.spec`` are our definitions of the messages we serve (facts from Kafka's message
specifications, in our own notation); ``generated/`` holds the codecs that
scripts/gen_kafka_messages.py makes from them (never edited by hand; a test fails when they
are stale); :mod:`.wire` the primitive types; :mod:`.headers` request and response headers
and framing; :mod:`.api_keys` the APIs and version ranges this broker serves. Pure: no I/O.
The listener that speaks it is :mod:`kraftlog.broker.kafka_listener`.
"""
