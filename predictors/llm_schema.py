"""The JSON answer the LLM must give (pydantic), and its lenient extraction from model text."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

WEEK_S = 7 * 86400.0


class AnswerForecast(BaseModel):
    """One expected job, with times in seconds from now."""

    model_config = ConfigDict(extra="forbid")

    start_in_s: float = Field(ge=0, le=WEEK_S, description="Earliest arrival, seconds from now.")
    end_in_s: float = Field(ge=0, le=WEEK_S, description="Latest arrival, seconds from now.")
    gpu_count: int = Field(ge=1, le=4096, description="GPUs the job will ask for.")
    gpu_model: str | None = Field(default=None, max_length=64)
    expected_duration_s: float | None = Field(default=None, ge=0, le=30 * 86400.0)
    confidence: float = Field(ge=0, le=1, description="Probability the job arrives in the window.")
    rationale: str = Field(default="", max_length=500)

    @model_validator(mode="after")
    def _ordered(self) -> AnswerForecast:
        if self.end_in_s < self.start_in_s:
            raise ValueError("end_in_s must not be before start_in_s")
        return self


class Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    forecasts: list[AnswerForecast] = Field(max_length=16)


def answer_schema() -> dict[str, object]:
    """The JSON Schema of `Answer`: what `prompts/<name>/<version>.schema.json` must hold."""
    return Answer.model_json_schema()


def extract_json(text: str) -> str:
    """The JSON object inside a model's text: tolerates a code fence or a stray sentence."""
    start = text.find("{")
    end = text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("the answer contains no JSON object")
    return text[start : end + 1]


def parse_answer(text: str) -> Answer:
    """Validate a model's answer; raises ValueError (pydantic's ValidationError included)."""
    return Answer.model_validate_json(extract_json(text))
