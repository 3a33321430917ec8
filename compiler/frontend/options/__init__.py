"""Rule options and state matches: ``log`` (``prefix`` ``rate`` ``snap``), ``limit``,
``audit`` and ``ct state``, checked into IR (``check``). docs/language.md "Logging,
limits, audit and connection state" is the reference."""
