"""Build the sensor a SensorConfig describes, for one worker."""

from __future__ import annotations

from pathlib import Path

from genworker.autonomy.inbox import InboxWriter
from genworker.autonomy.sensing.base import Clock, PullSensor, utc_now
from genworker.autonomy.sensing.cursors import CursorStore
from genworker.autonomy.sensing.email import EmailSensor
from genworker.autonomy.sensing.errors import SensorConfigError
from genworker.autonomy.sensing.facts import FactEmitter
from genworker.autonomy.sensing.filters import (
    EmailFilter,
    FeishuFolderFilter,
    GitFilter,
    WebhookFilter,
    WorkspaceFileFilter,
    parse_filter,
)
from genworker.autonomy.sensing.git import GitSensor
from genworker.autonomy.sensing.workspace_file import WorkspaceFileSensor
from genworker.ids import safe_join
from genworker.mail.errors import MailConfigError
from genworker.mail.imap import ImapAccount
from genworker.workspace.models.persona import SensorConfig
from genworker.workspace.snapshot import Worker

__all__ = ["build_sensor", "worker_dir"]


def worker_dir(workspace: Path, tenant_id: str, worker_id: str) -> Path:
    return safe_join(workspace, "tenants", tenant_id, "workers", worker_id)


def build_sensor(
    worker: Worker, config: SensorConfig, writer: InboxWriter, *, workspace: Path, clock: Clock = utc_now
) -> PullSensor | None:
    """The pull sensor for `config`; None for a push-only sensor (webhook: the HTTP route feeds it).

    SensorConfigError when the config cannot work (bad filter, a path outside the tenant, no credentials,
    a sensor type this server does not have).
    """
    sensor_filter = parse_filter(config)
    if isinstance(sensor_filter, FeishuFolderFilter):
        raise SensorConfigError(
            f"feishu_folder sensors (folder {sensor_filter.folder_path!r}) are not supported on this server yet"
        )
    folder = worker_dir(workspace, worker.tenant_id, worker.worker_id)
    tenant_folder = safe_join(workspace, "tenants", worker.tenant_id)
    cursors = CursorStore(folder)
    emitter = FactEmitter(worker.tenant_id, worker.worker_id, config, writer, sensor_filter)
    if isinstance(sensor_filter, WorkspaceFileFilter):
        return WorkspaceFileSensor(config, emitter, cursors, clock, sensor_filter=sensor_filter, limit=tenant_folder)
    if isinstance(sensor_filter, GitFilter):
        return GitSensor(config, emitter, cursors, clock, sensor_filter=sensor_filter, limit=tenant_folder)
    if isinstance(sensor_filter, EmailFilter):
        try:
            account = ImapAccount.from_credentials(worker.credentials, sensor_filter.security)
        except MailConfigError as exc:
            raise SensorConfigError(str(exc)) from None
        return EmailSensor(config, emitter, cursors, clock, sensor_filter=sensor_filter, account=account)
    assert isinstance(sensor_filter, WebhookFilter)
    return None
