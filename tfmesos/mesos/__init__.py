"""A small client of the Mesos v1 scheduler HTTP API, and what it needs.

Protocol facts come from apache/mesos ``docs/scheduler-http-api.md``,
``docs/recordio.md`` and ``include/mesos/v1/{mesos,scheduler/scheduler}.proto``.
Messages are plain dicts in Mesos's JSON encoding (proto field names, enums as
strings): the protocol is small enough that typed wrappers would only repeat
the proto.
"""
