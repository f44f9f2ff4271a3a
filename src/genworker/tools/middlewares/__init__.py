"""Tool middlewares: `(ctx, call_next) -> outcome`, composed once by the ToolPipeline, outermost first.

A middleware that changes the request passes on a new context (`dataclasses.replace`).
"""

from genworker.tools.middlewares.audit import Auditing, audit_record
from genworker.tools.middlewares.chain import CallNext, Hook, Middleware, compose
from genworker.tools.middlewares.policy import (
    READ_ONLY_POSTURES,
    REQUIRES_TRUST_3,
    SAFE_EFFECTS,
    TRUST_REQUIRED,
    approval,
    governance,
    matches_any,
    permission,
    policy_denial,
    posture_denial,
    required_trust,
    run_hooks,
)
from genworker.tools.middlewares.redaction import MASK, Redactor, redaction, redactor_for
from genworker.tools.middlewares.runtime import timeout
from genworker.tools.middlewares.validation import SchemaValidation, compile_schema

__all__ = [
    "MASK",
    "READ_ONLY_POSTURES",
    "REQUIRES_TRUST_3",
    "SAFE_EFFECTS",
    "TRUST_REQUIRED",
    "Auditing",
    "CallNext",
    "Hook",
    "Middleware",
    "Redactor",
    "SchemaValidation",
    "approval",
    "audit_record",
    "compile_schema",
    "compose",
    "governance",
    "matches_any",
    "permission",
    "policy_denial",
    "posture_denial",
    "redaction",
    "redactor_for",
    "required_trust",
    "run_hooks",
    "timeout",
]
