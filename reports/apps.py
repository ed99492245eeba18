from __future__ import annotations

from django.apps import AppConfig


class ReportsConfig(AppConfig):
    """Seed 004's Reporting Service: per-user reports over a window (figures, charts, JSON) and
    each run's timeline. Reads only: the engine's tables through their indexes, nothing written."""

    name = "reports"
    verbose_name = "Reports"
