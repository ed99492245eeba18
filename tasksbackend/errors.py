"""Exceptions a task's result can name that the task's own function did not raise: what the
engine recorded about an attempt (`TaskError.exception_class_path` must name a class)."""

from __future__ import annotations


class TaskNotRegistered(Exception):
    """A worker was asked to run a task whose module it never imported."""


class TaskTimedOut(TimeoutError):
    """An attempt was still running at the end of its window (the supervisor took it back)."""


class TaskStepError(Exception):
    """An error the engine recorded for the attempt, not an exception of the task's function."""
