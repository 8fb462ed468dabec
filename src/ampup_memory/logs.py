"""Logging for every command: one handler on stderr, text or JSON lines.

AmpUp Memory's own loggers (and uvicorn's server log) take the configured level; other
libraries log warnings and above, so a chatty dependency never floods the output. The access
log (one line per request, ``uvicorn.access``) is on or off by its own setting, whatever the
level.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

import click

from ampup_memory.settings import Settings
from ampup_memory.timefmt import format_time

OWN_LOGGERS = ("ampup_memory", "uvicorn", "uvicorn.error")
ACCESS_LOGGER = "uvicorn.access"


class JsonLines(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the error, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": format_time(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(settings: Settings) -> None:
    """Install the one stderr handler (idempotent: a second call replaces the first)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if settings.log_json else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    level = getattr(logging, settings.log_level.upper())
    root.setLevel(max(level, logging.WARNING))
    for name in OWN_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.handlers[:] = []
        logger.propagate = True
    access = logging.getLogger(ACCESS_LOGGER)
    access.handlers[:] = []
    access.propagate = True
    access.setLevel(logging.INFO)
    access.disabled = not settings.access_log


def announce(settings: Settings, message: str, *, warning: bool = False) -> None:
    """A line a command prints on stderr whatever the log level (`serve`'s address, its
    trust-mode warning): as text, or with ``log_json`` one JSON line as every log line is,
    so a log shipper reading JSON reads it too."""
    if settings.log_json:
        level = logging.WARNING if warning else logging.INFO
        record = logging.makeLogRecord({"name": "ampup_memory", "levelno": level,
                                        "levelname": logging.getLevelName(level),
                                        "msg": message})
        click.echo(JsonLines().format(record), err=True)
        return
    prefix = f"{click.style('warning:', fg='yellow')} " if warning else ""
    click.echo(prefix + message, err=True)
