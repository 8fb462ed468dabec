"""Logging for every command: one handler on stderr, text or JSON lines.

AmpUp Memory's own loggers (and uvicorn's server log) take the configured level; other
libraries log warnings and above, so a chatty dependency never floods the output. The access
log (one line per request, ``uvicorn.access``) is on or off by its own setting, whatever the
level.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import sys
import unicodedata
from datetime import UTC, datetime

import click

from ampup_memory.settings import Settings
from ampup_memory.timefmt import format_time

OWN_LOGGERS = ("ampup_memory", "uvicorn", "uvicorn.error")
ACCESS_LOGGER = "uvicorn.access"


# What a log line never holds as it is: control characters (CR and LF would start a forged
# line; ESC starts a terminal sequence that recolours, moves the cursor or clears the screen
# of whoever tails the log), line and paragraph separators, and format characters (the
# bidirectional overrides reorder what a reader sees; zero-width ones hide).
_UNSHOWN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def shown(text: str) -> str:
    """``text`` with every character a log line must not hold as it is written as an
    escape (``\\x1b``, ``\\u202e``): a caller's text (a path, a header, a name in an error
    message) can neither break a log line in two nor hide or recolour part of it."""
    if text.isprintable():
        return text
    return "".join(ch if unicodedata.category(ch) not in _UNSHOWN
                   else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _message(record: logging.LogRecord) -> str:
    return shown(record.getMessage())


class TextLines(logging.Formatter):
    """``TEXT_FORMAT`` lines, the message escaped as `shown` says (a traceback keeps its
    lines)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = shown(record.message)
        return super().formatMessage(record)


class JsonLines(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the error, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": format_time(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": _message(record),
        }
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ForwardedClient(logging.Filter):
    """The access log's client as an address, never a caller's text. uvicorn takes the
    client from ``X-Forwarded-For`` when the connection comes from 127.0.0.1 (a proxy on
    this machine, or any local process), whatever that header holds: ``6.6.6.6 - "GET
    /forged HTTP/1.1" 200`` made the line read as another request. Anything but an IP
    address (and port) is logged as ``invalid-x-forwarded-for``."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and args and isinstance(args[0], str) and args[0] \
                and not _is_address(args[0]):
            record.args = ("invalid-x-forwarded-for", *args[1:])
        return True


def _is_address(client: str) -> bool:
    """``host:port`` as uvicorn writes a client (``%s:%d``; an IPv6 host unbracketed), or
    a host alone."""
    for host in (client, client.rpartition(":")[0]):
        try:
            ipaddress.ip_address(host)
            return True
        except ValueError:
            continue
    return False


def configure_logging(settings: Settings) -> None:
    """Install the one stderr handler (idempotent: a second call replaces the first)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if settings.log_json else TextLines(TEXT_FORMAT))
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
    access.filters[:] = [ForwardedClient()]
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
