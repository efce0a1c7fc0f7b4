"""The agent loop shared by evaluation, the front door and CPU rollouts."""

from serving.agent.chat import BackendOutputError, ChatClient, ChatReply, RetryPolicy
from serving.agent.loop import Agent, AgentConfig, final_text, openai_tools
from serving.agent.types import (
    AgentEvent,
    EpisodeOptions,
    Message,
    PromptRenderer,
    RawCall,
    RawParse,
    RawParser,
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
    "EpisodeOptions",
    "Message",
    "PromptRenderer",
    "RawCall",
    "RawParse",
    "RawParser",
    "RetryPolicy",
    "ToolCall",
    "ToolChoice",
    "ToolExecutor",
    "ToolReply",
    "Trajectory",
    "TransportError",
    "Turn",
    "final_text",
    "openai_tools",
]
