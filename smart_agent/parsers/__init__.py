"""Parsers: lines of logs and job history into typed, redacted `predictors.types.Event`s."""

from smart_agent.parsers.auto import PARSER_NAMES, AutoParser, kind_for_path, make_parser
from smart_agent.parsers.base import BaseParser, Parser, ParserStats
from smart_agent.parsers.cues import DEFAULT_RULES, STRONG_CUES, CueMatcher, CueRule
from smart_agent.parsers.jobs_csv import JobsCsvParser
from smart_agent.parsers.jsonl import JsonlParser
from smart_agent.parsers.plain import PlainParser
from smart_agent.parsers.shell import ShellHistoryParser
from smart_agent.parsers.slurm import SacctParser
from smart_agent.parsers.squeue import SqueueParser

__all__ = [
    "DEFAULT_RULES",
    "PARSER_NAMES",
    "STRONG_CUES",
    "AutoParser",
    "BaseParser",
    "CueMatcher",
    "CueRule",
    "JobsCsvParser",
    "JsonlParser",
    "Parser",
    "ParserStats",
    "PlainParser",
    "SacctParser",
    "ShellHistoryParser",
    "SqueueParser",
    "kind_for_path",
    "make_parser",
]
