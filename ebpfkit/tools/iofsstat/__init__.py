"""iofsstat: file IO per process and file, next to disk IO."""
