"""Engine logging that does not import ``logging`` on a tool's start path.

Until something imports logging (ebpfkit's CLI does, so does a notebook's
``logging.basicConfig``), nobody can have configured a handler, so records below WARNING
could go nowhere anyway: they are dropped without paying for the import.
"""

import sys

WARNING, INFO, DEBUG = 30, 20, 10


class EngineLogger:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def _logger(self, level: int):
        logging = sys.modules.get("logging")
        if logging is None:
            if level < WARNING:
                return None
            import logging
        return logging.getLogger(self.name)

    def isEnabledFor(self, level: int) -> bool:
        logger = self._logger(level)
        return logger is not None and logger.isEnabledFor(level)

    def log(self, level: int, msg: str, *args) -> None:
        logger = self._logger(level)
        if logger is not None:
            logger.log(level, msg, *args)

    def debug(self, msg: str, *args) -> None:
        self.log(DEBUG, msg, *args)

    def info(self, msg: str, *args) -> None:
        self.log(INFO, msg, *args)

    def warning(self, msg: str, *args) -> None:
        self.log(WARNING, msg, *args)


def get_logger(name: str) -> EngineLogger:
    return EngineLogger(name)
