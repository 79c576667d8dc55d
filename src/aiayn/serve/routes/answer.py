"""POST /v1/answer: questions about contexts, one answer each."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, model_validator

from aiayn.serve.routes import Route
from aiayn.serve.routes.fields import Body, Texts, refused


class AnswerRequest(Body):
    """A context and a question, or two lists of the same length."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"context": "a story", "question": "a question about it"}]})

    context: Texts
    question: Texts

    @model_validator(mode="after")
    def paired(self) -> "AnswerRequest":
        n, m = len(self.contexts), len(self.questions)
        if n != m:
            raise refused(f"{n} contexts but {m} questions")
        return self

    @property
    def contexts(self) -> list[str]:
        return [self.context] if isinstance(self.context, str) else list(self.context)

    @property
    def questions(self) -> list[str]:
        return [self.question] if isinstance(self.question, str) else list(self.question)


class AnswerResponse(BaseModel):
    answers: list[str]


async def answer(pipeline, r: AnswerRequest, server) -> dict:
    return {"answers": await server.decode(pipeline.prepare(list(zip(r.contexts, r.questions))))}


ROUTES = (Route("POST", "/v1/answer", answer, "answer questions about contexts", AnswerRequest, AnswerResponse,
                texts=("context", "question"), page=True),)
