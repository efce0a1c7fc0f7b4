"""The one episode runner, shared by the front door, the evaluation harness, the quick eval
and the CPU GRPO rollouts; and the model backends it runs on."""

from serving.agent.backends import EndpointBackend, EngineBackend, EpisodeContext, ModelBackend
from serving.agent.chat import BackendOutputError, ChatClient, ChatReply, RetryPolicy
from serving.agent.loop import Agent, AgentConfig, final_text
from serving.agent.types import (
    AgentEvent,
    EpisodeOptions,
    Message,
    ToolCall,
    ToolChoice,
    ToolExecutor,
    ToolReply,
    Trajectory,
    TransportError,
    Turn,
)

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentEvent",
    "BackendOutputError",
    "ChatClient",
    "ChatReply",
    "EndpointBackend",
    "EngineBackend",
    "EpisodeContext",
    "EpisodeOptions",
    "Message",
    "ModelBackend",
    "RetryPolicy",
    "ToolCall",
    "ToolChoice",
    "ToolExecutor",
    "ToolReply",
    "Trajectory",
    "TransportError",
    "Turn",
    "final_text",
]
