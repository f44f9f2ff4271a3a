"""CHANNEL_CREDENTIALS.json: per-worker platform secrets.

Every value is a `SecretStr`: redacted in repr, str and JSON. Unknown keys are dropped
(and reported by name only), so no stray secret is ever kept in a printable field. Numbers are
read as text (`agent_id: 1000002`, a numeric `robot_code`), as upstream writes them.
"""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, field_validator

__all__ = [
    "ChannelCredentials",
    "DingTalkCredentials",
    "EmailCredentials",
    "FeishuCredentials",
    "SlackCredentials",
    "WeComCredentials",
]


class _Secrets(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", hide_input_in_errors=True, coerce_numbers_to_str=True)

    @classmethod
    def accepted_keys(cls) -> frozenset[str]:
        """Field names and the other spellings they accept (`client_id` for DingTalk's `app_key`)."""
        keys = set(cls.model_fields)
        for info in cls.model_fields.values():
            if isinstance(info.validation_alias, AliasChoices):
                keys.update(c for c in info.validation_alias.choices if isinstance(c, str))
        return frozenset(keys)


class FeishuCredentials(_Secrets):
    app_id: SecretStr
    app_secret: SecretStr
    verification_token: SecretStr | None = None
    encrypt_key: SecretStr | None = None


class WeComCredentials(_Secrets):
    corpid: SecretStr
    corpsecret: SecretStr
    agent_id: SecretStr | None = None  # needed to send direct messages (group chats do without)
    token: SecretStr | None = None
    encoding_aes_key: SecretStr | None = None


class DingTalkCredentials(_Secrets):
    # the console's Client ID / Client Secret (formerly AppKey / AppSecret), which Stream mode asks for
    app_key: SecretStr = Field(validation_alias=AliasChoices("app_key", "client_id"))
    app_secret: SecretStr = Field(validation_alias=AliasChoices("app_secret", "client_secret"))
    robot_code: SecretStr | None = None


class SlackCredentials(_Secrets):
    bot_token: SecretStr
    signing_secret: SecretStr  # required: Slack's webhooks cannot be verified without it
    app_token: SecretStr | None = None  # app-level token, for Socket Mode
    team_id: str | None = None  # the Slack workspace id (not a secret)

    @field_validator("app_token")
    @classmethod
    def _app_level(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith("xapp-"):
            raise ValueError(
                "an app-level token starts with xapp- (Slack app settings, Basic Information, App-Level Tokens; "
                "the bot token xoxb-… goes in bot_token)"
            )
        return value


class EmailCredentials(_Secrets):
    worker_address: str
    worker_username: SecretStr | None = None
    worker_password: SecretStr | None = None
    worker_imap_host: str | None = None
    worker_imap_port: int = 993
    worker_smtp_host: str | None = None
    worker_smtp_port: int = 465
    owner_address: str | None = None
    owner_username: SecretStr | None = None
    owner_password: SecretStr | None = None
    owner_imap_host: str | None = None
    owner_imap_port: int = 993
    owner_smtp_host: str | None = None
    owner_smtp_port: int = 465


class ChannelCredentials(_Secrets):
    feishu: FeishuCredentials | None = None
    wecom: WeComCredentials | None = None
    dingtalk: DingTalkCredentials | None = None
    slack: SlackCredentials | None = None
    email: EmailCredentials | None = None

    def __str__(self) -> str:
        return f"ChannelCredentials(platforms={self.platforms()})"

    def platforms(self) -> list[str]:
        return [name for name in type(self).model_fields if getattr(self, name) is not None]
