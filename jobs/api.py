"""The jobs JSON API (Django REST framework), the orders API's conventions: token auth, 20 a page,
errors `{field: [messages]}`, 404 for another user's job. Views are thin: they parse, call the
scheduler's job selectors (scoped by the owner) and services, and map the services' exceptions:
`WorkflowInputError` -> 400 with field errors (nothing written; staff-only work asked for by a
customer is one, on `workflow`), `JobStateError` -> 409. Every service call says whether the
caller is staff (`by_staff`): the services decide who may schedule what."""

from __future__ import annotations

import uuid
from typing import Any, NoReturn

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, status, viewsets
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.throttling import BaseThrottle

from jobs.account import account_status
from sasproject.api_input import PageNumberPagination
from sasproject.tokens.authentication import HashedTokenAuthentication
from scheduler.dispatcher.selectors import (
    job_edges,
    job_get,
    job_history,
    job_list,
    job_runs,
    job_runs_count,
    job_schedule_text,
)
from scheduler.models import HistoryStatus, Job
from scheduler.outputs import runs_outputs
from scheduler.paging import IdFirstPaginator
from scheduler.permissions import staff_may
from scheduler.services.jobs import (
    JobStateError,
    job_backfill,
    job_create,
    job_delete,
    job_pause,
    job_preview,
    job_resume,
    job_run_now,
    job_update,
)
from scheduler.throttles import ScopeThrottle
from scheduler.workflows import WorkflowInputError

from .errors import split_errors
from .presenters import history_data, job_data, run_data
from .serializers import (
    BackfillResultSerializer,
    BackfillSerializer,
    FiringSerializer,
    JobHistorySerializer,
    JobRunSerializer,
    JobSerializer,
    JobWriteSerializer,
    PauseSerializer,
    PreviewQuerySerializer,
    PreviewSerializer,
    in_zone,
)

# Field names a job has in the API (anything else in a service error is about the workflow input).
JOB_FIELDS = frozenset(JobWriteSerializer().fields) - {"input"}


DETAIL = OpenApiResponse(OpenApiTypes.OBJECT, description='{"detail": "..."}')
LIMITED = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description='A rate (Retry-After header) or a per-user quota refused it: {"detail": "... the limit '
    'is ...", "limit": "..."}. Nothing was written.',
)
NOT_FOUND = OpenApiResponse(OpenApiTypes.OBJECT, description="No such job for this user.")
CONFLICT = OpenApiResponse(OpenApiTypes.OBJECT, description="The job is not in a state that allows this.")
FIELD_ERRORS = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description='Field errors: {"field": ["message"]}; the workflow\'s own under '
    '"input": {"key": ["message"]}.',
)
JOB_ID = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="The job id.")
PAGE = OpenApiParameter("page", OpenApiTypes.INT, description="Page number (20 a page).")


def raise_field_errors(exc: WorkflowInputError) -> NoReturn:
    """The service's errors as a 400: job fields by name, the workflow's under `input`."""
    own, about_input = split_errors(exc.errors, JOB_FIELDS)
    body: dict[str, Any] = dict(own)
    if about_input:
        body["input"] = {key or "non_field_errors": msgs for key, msgs in about_input.items()}
    raise exceptions.ValidationError(body) from None


def _owner_id(request: Request) -> int:
    user_id = request.user.pk
    assert isinstance(user_id, int), "IsAuthenticated guarantees a user"
    return user_id


def _actor(request: Request) -> str:
    return f"user {request.user.get_username()} (api)"


def _by_staff(request: Request) -> bool:
    """May the caller do staff work (the one rule, scheduler/permissions.py; not `is_staff`)."""
    return staff_may(request.user)


def _job_url(request: Request, job_id: int) -> str:
    return str(reverse("api-job-detail", args=[job_id], request=request))


class IdFirstPages(PageNumberPagination):
    """The API's pages (`?page=`, 20 a page, the same answers), read by their ids first: a job's
    500th page of runs reads no row it skips (scheduler/paging.py). `known_count`: the count
    if the view has it (a job's runs, counted with the job), else counted by a query."""

    known_count: int | None = None

    def django_paginator_class(self, queryset: Any, page_size: int) -> IdFirstPaginator:
        return IdFirstPaginator(queryset, page_size, count=self.known_count)


@extend_schema_view(
    list=extend_schema(
        summary="Your jobs, newest first",
        parameters=[PAGE],
        responses={200: JobSerializer(many=True)},
    ),
    retrieve=extend_schema(
        summary="A job: its schedule, state, next and last run",
        parameters=[JOB_ID],
        responses={200: JobSerializer, 404: NOT_FOUND},
    ),
    create=extend_schema(
        summary="Create a job (one-off or recurring)",
        request=JobWriteSerializer,
        responses={201: JobSerializer, 400: FIELD_ERRORS, 429: LIMITED},
    ),
    update=extend_schema(
        summary="Edit a job (name and workflow required; fields not sent stay as they are)",
        request=JobWriteSerializer,
        parameters=[JOB_ID],
        responses={200: JobSerializer, 400: FIELD_ERRORS, 404: NOT_FOUND, 429: LIMITED},
    ),
    partial_update=extend_schema(
        summary="Edit some fields of a job",
        request=JobWriteSerializer,
        parameters=[JOB_ID],
        responses={200: JobSerializer, 400: FIELD_ERRORS, 404: NOT_FOUND, 429: LIMITED},
    ),
    destroy=extend_schema(
        summary="Delete a job: its runs not started yet are cancelled, those going finish",
        parameters=[JOB_ID],
        responses={204: None, 404: NOT_FOUND},
    ),
)
class JobViewSet(viewsets.GenericViewSet):
    """Jobs of the authenticated user."""

    permission_classes = [IsAuthenticated]
    lookup_value_regex = "[0-9]+"
    # For the schema only; every read goes through the owner-scoped selectors.
    queryset = Job.objects.none()
    serializer_class = JobSerializer
    pagination_class = IdFirstPages

    def get_authenticators(self) -> list[Any]:
        # The form's live preview calls it from the page, signed in by the session (a GET: no
        # CSRF token needed); everything else is token only, like the orders API.
        if self.request is not None and self.request.path.rstrip("/").endswith("/preview"):
            return [HashedTokenAuthentication(), SessionAuthentication()]
        return super().get_authenticators()

    def get_throttles(self) -> list[BaseThrottle]:
        # Every action that creates work or re-arms a job: one budget per user with the job
        # pages (settings.SAS_RATES["job_write"]); refused with a 429 naming the limit.
        if getattr(self, "action", None) in ("create", "update", "partial_update", "run_now", "backfill"):
            return [ScopeThrottle.of("job_write")]
        return []

    # -- helpers ---------------------------------------------------------------------------------

    def _job(self, request: Request, pk: str | None) -> Job:
        # lookup_value_regex keeps it digits; a number past bigint cannot be a job.
        if not pk or len(pk) > 18:
            raise exceptions.NotFound("No such job.")
        try:
            return job_get(owner_id=_owner_id(request), job_id=int(pk))
        except Job.DoesNotExist:
            raise exceptions.NotFound("No such job.") from None

    def _detail(self, request: Request, job_id: int) -> dict[str, Any]:
        found = job_get(owner_id=_owner_id(request), job_id=job_id)
        edges = job_edges(owner_id=_owner_id(request), job_id=job_id)
        return {**job_data(found), **edges, "url": _job_url(request, job_id)}

    # -- CRUD ------------------------------------------------------------------------------------

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(job_list(owner_id=_owner_id(request))) or []
        body = [{**job_data(job), "url": _job_url(request, job.pk)} for job in page]
        response = self.get_paginated_response(JobSerializer(body, many=True).data)
        # Issue 30: whether an operator paused the whole account, and why.
        response.data["account"] = account_status(owner_id=_owner_id(request))
        return response

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        job = self._job(request, pk)
        return Response(JobSerializer(self._detail(request, job.pk)).data)

    def create(self, request: Request) -> Response:
        serializer = JobWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        fields = serializer.to_service(create=True)
        try:
            job = job_create(owner_id=_owner_id(request), by_staff=_by_staff(request), **fields)
        except WorkflowInputError as exc:
            raise_field_errors(exc)
        body = JobSerializer(self._detail(request, job.pk)).data
        return Response(body, status=status.HTTP_201_CREATED, headers={"Location": body["url"]})

    def update(self, request: Request, pk: str | None = None) -> Response:
        return self._update(request, pk, partial=False)

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        return self._update(request, pk, partial=True)

    def _update(self, request: Request, pk: str | None, *, partial: bool) -> Response:
        job = self._job(request, pk)
        serializer = JobWriteSerializer(data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        fields = serializer.to_service(job_zone=job.timezone)
        try:
            job_update(job_id=job.pk, by_staff=_by_staff(request), actor=_actor(request), **fields)
        except WorkflowInputError as exc:
            raise_field_errors(exc)
        except Job.DoesNotExist:  # deleted meanwhile
            raise exceptions.NotFound("No such job.") from None
        return Response(JobSerializer(self._detail(request, job.pk)).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        job = self._job(request, pk)
        try:
            job_delete(job_id=job.pk, actor=_actor(request))
        except Job.DoesNotExist:
            raise exceptions.NotFound("No such job.") from None
        return Response(status=status.HTTP_204_NO_CONTENT)

    # -- actions ---------------------------------------------------------------------------------

    def _state_change(self, request: Request, pk: str | None, call: Any, **kwargs: Any) -> Response:
        job = self._job(request, pk)
        try:
            call(job_id=job.pk, actor=_actor(request), **kwargs)
        except JobStateError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(JobSerializer(self._detail(request, job.pk)).data)

    @extend_schema(
        summary="Pause a job: its runs not started yet are cancelled, nothing of it starts until it is "
        "resumed (runs going on finish)",
        request=PauseSerializer,
        parameters=[JOB_ID],
        responses={200: JobSerializer, 400: FIELD_ERRORS, 404: NOT_FOUND, 409: CONFLICT},
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str | None = None) -> Response:
        serializer = PauseSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return self._state_change(request, pk, job_pause, note=serializer.validated_data.get("note", ""))

    @extend_schema(
        summary="Resume a paused job from now (occurrences missed while paused do not run)",
        request=None,
        parameters=[JOB_ID],
        responses={200: JobSerializer, 404: NOT_FOUND, 409: CONFLICT},
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        return self._state_change(request, pk, job_resume)

    @extend_schema(
        summary="Run the job now, as its overlap policy allows",
        request=None,
        parameters=[JOB_ID],
        responses={200: FiringSerializer, 400: FIELD_ERRORS, 404: NOT_FOUND, 409: CONFLICT, 429: LIMITED},
    )
    @action(detail=True, methods=["post"], url_path="run-now")
    def run_now(self, request: Request, pk: str | None = None) -> Response:
        job = self._job(request, pk)
        try:
            firing = job_run_now(job_id=job.pk, by_staff=_by_staff(request), actor=_actor(request))
        except WorkflowInputError as exc:  # staff-only work: on `workflow`
            raise_field_errors(exc)
        except JobStateError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        body = {
            "outcome": firing.outcome,
            "run_id": firing.run_id,
            "scheduled_for": firing.scheduled_for,
            "reason": firing.reason or "",
        }
        return Response(FiringSerializer(body).data)

    @extend_schema(
        summary="Queue the occurrences of a past time range that never ran",
        request=BackfillSerializer,
        parameters=[JOB_ID],
        responses={
            200: BackfillResultSerializer,
            400: FIELD_ERRORS,
            404: NOT_FOUND,
            409: CONFLICT,
            429: LIMITED,
        },
    )
    @action(detail=True, methods=["post"])
    def backfill(self, request: Request, pk: str | None = None) -> Response:
        job = self._job(request, pk)
        serializer = BackfillSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            result = job_backfill(
                job_id=job.pk,
                by_staff=_by_staff(request),
                start=in_zone(serializer.validated_data["start"], job.timezone),
                end=in_zone(serializer.validated_data["end"], job.timezone),
                actor=_actor(request),
                dependents=serializer.validated_data["dependents"],
            )
        except WorkflowInputError as exc:  # about the range (start / end), or staff-only work (workflow)
            raise exceptions.ValidationError(exc.errors) from None
        except JobStateError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(
            BackfillResultSerializer({"queued": list(result.queued), "already": list(result.already)}).data
        )

    @extend_schema(
        summary="The job's runs, newest first, each with its outcome and its steps' outputs",
        parameters=[JOB_ID, PAGE],
        responses={200: JobRunSerializer(many=True), 404: NOT_FOUND},
    )
    @action(detail=True, methods=["get"])
    def runs(self, request: Request, pk: str | None = None) -> Response:
        # The job's runs counted in the query that finds the job (404 if it is not the caller's);
        # none of the job's own annotations: this answer shows none of them.
        job_id = int(pk) if pk and len(pk) <= 18 else 0  # as _job: digits; past bigint, no job
        count = job_runs_count(owner_id=_owner_id(request), job_id=job_id)
        if count is None:
            raise exceptions.NotFound("No such job.")
        pages = self.paginator
        assert isinstance(pages, IdFirstPages)
        pages.known_count = count
        page = self.paginate_queryset(job_runs(owner_id=_owner_id(request), job_id=job_id)) or []
        outputs = runs_outputs(owner_id=_owner_id(request), runs=page)
        body = [run_data(r, outputs=outputs[r.pk]) for r in page]
        return self.get_paginated_response(JobRunSerializer(body, many=True).data)

    @extend_schema(
        summary="The job's execution history, newest first: one row per attempt, skip or buffer",
        parameters=[
            JOB_ID,
            PAGE,
            OpenApiParameter(
                "status", str, enum=HistoryStatus.values, description="Only rows with this status."
            ),
            OpenApiParameter("run", OpenApiTypes.UUID, description="Only rows of this run."),
        ],
        responses={200: JobHistorySerializer(many=True), 400: FIELD_ERRORS, 404: NOT_FOUND},
    )
    @action(detail=True, methods=["get"])
    def history(self, request: Request, pk: str | None = None) -> Response:
        job = self._job(request, pk)
        rows = job_history(owner_id=_owner_id(request), job_id=job.pk)
        wanted = request.query_params.get("status")
        if wanted is not None:
            if wanted not in HistoryStatus.values:
                raise exceptions.ValidationError(
                    {"status": [f"must be one of {', '.join(HistoryStatus.values)}"]}
                )
            rows = rows.filter(status=wanted)
        run = request.query_params.get("run")
        if run is not None:
            try:
                rows = rows.filter(run_id=uuid.UUID(run))
            except ValueError:
                raise exceptions.ValidationError({"run": ["must be a run id (UUID)"]}) from None
        page = self.paginate_queryset(rows) or []
        return self.get_paginated_response(
            JobHistorySerializer([history_data(r) for r in page], many=True).data
        )

    @extend_schema(
        summary="The next fire times of a cron expression in a time zone, before saving a job",
        parameters=[
            OpenApiParameter("cron", str, required=True, description="e.g. 30 2 * * 1-5 or @daily"),
            OpenApiParameter("timezone", str, description="IANA time zone (default UTC)."),
            OpenApiParameter("count", int, description="How many times (1-50, default 5)."),
            OpenApiParameter(
                "start_at",
                str,
                description="The job's 'not before' (ISO 8601; without an offset, read in `timezone`): "
                "no time before it.",
            ),
            OpenApiParameter(
                "end_at",
                str,
                description="The job's 'not after' (as start_at): no time after it - fewer times, "
                "or none, when the window ends first.",
            ),
        ],
        responses={200: PreviewSerializer, 400: FIELD_ERRORS},
    )
    @action(detail=False, methods=["get"])
    def preview(self, request: Request) -> Response:
        query = PreviewQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        cron, zone, count = (query.validated_data[k] for k in ("cron", "timezone", "count"))
        window = {k: query.validated_data[k] for k in ("start_at", "end_at")}
        try:
            times = job_preview(cron=cron, timezone_name=zone, count=count, **window)
        except WorkflowInputError as exc:
            raise exceptions.ValidationError(exc.errors) from None
        text = job_schedule_text(Job(is_recurring=True, cron=" ".join(cron.split()), timezone=zone))
        return Response(
            PreviewSerializer({"cron": cron, "timezone": zone, "schedule_text": text, "times": times}).data
        )
