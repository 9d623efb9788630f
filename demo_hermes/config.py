"""The demo's ``config.yaml``: the global model, provider, reasoning effort and approval timeout.

Like Hermes, runs read it afresh when they start, so a dashboard change reaches the next run.
"""

import copy
from typing import Any, Final

__all__ = ["PROVIDERS", "DemoConfig", "deep_merge"]

PROVIDERS: Final[list[dict[str, Any]]] = [
    {"slug": "demo", "name": "Demo provider", "models": ["demo-model", "demo-model-large"]},
    {"slug": "demo-alt", "name": "Demo alternative", "models": ["alt-model-small", "alt-model"]},
]


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Merge ``update`` into a copy of ``base``, recursing into nested objects (as ``PUT /api/config`` does)."""
    merged = copy.deepcopy(base)
    for key, value in update.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


class DemoConfig:
    """The configuration document, kept in the shape of Hermes's ``config.yaml``."""

    def __init__(self) -> None:
        self.document: dict[str, Any] = {
            "model": {"default": "demo-model", "provider": "demo", "base_url": None},
            "agent": {"reasoning_effort": "medium"},
            "approvals": {"mode": "manual", "timeout": 60},
        }

    @property
    def model(self) -> str:
        return str(self._model_section().get("default") or "demo-model")

    @property
    def provider(self) -> str:
        return str(self._model_section().get("provider") or "demo")

    @property
    def reasoning_effort(self) -> str:
        agent = self.document.get("agent")
        effort = agent.get("reasoning_effort") if isinstance(agent, dict) else None
        return str(effort or "medium")

    @property
    def approval_timeout(self) -> float:
        approvals = self.document.get("approvals")
        timeout = approvals.get("timeout") if isinstance(approvals, dict) else None
        return float(timeout) if isinstance(timeout, int | float) and timeout > 0 else 60.0

    def set_model(self, provider: str, model: str, base_url: str | None) -> None:
        self.document["model"] = {**self._model_section(), "default": model, "provider": provider, "base_url": base_url}

    def merge(self, update: dict[str, Any]) -> None:
        # The dashboard's form shows ``model`` as a bare name; writing one back changes the default model.
        if isinstance(update.get("model"), str):
            update = {**update, "model": {"default": update["model"]}}
        update = {key: value for key, value in update.items() if key != "model_context_length"}
        self.document = deep_merge(self.document, update)

    def for_web(self) -> dict[str, Any]:
        """``GET /api/config``: the dashboard flattens ``model`` to its name and adds ``model_context_length``."""
        document = copy.deepcopy(self.document)
        document["model"] = self.model
        document["model_context_length"] = 0
        return document

    def provider_options(self) -> list[dict[str, Any]]:
        return [
            {**provider, "is_current": provider["slug"] == self.provider, "total_models": len(provider["models"])}
            for provider in PROVIDERS
        ]

    def _model_section(self) -> dict[str, Any]:
        section = self.document.get("model")
        return section if isinstance(section, dict) else {}
