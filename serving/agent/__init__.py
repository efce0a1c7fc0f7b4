"""The agent loop shared by evaluation, the front door and CPU rollouts."""

from serving.agent.chat import BackendOutputError, ChatClient, ChatReply, RetryPolicy
from serving.agent.loop import Agent, AgentConfig, final_text, openai_tools
from serving.agent.types import (
    Message,
    PromptRenderer,
    RawCall,
    RawParse,
    RawParser,
    ToolCall,
    ToolExecutor,
    ToolReply,
    Trajectory,
    TransportError,
    Turn,
)

__all__ = [
    "Agent",
    "AgentConfig",
    "BackendOutputError",
    "ChatClient",
    "ChatReply",
    "Message",
    "PromptRenderer",
    "RawCall",
    "RawParse",
    "RawParser",
    "RetryPolicy",
    "ToolCall",
    "ToolExecutor",
    "ToolReply",
    "Trajectory",
    "TransportError",
    "Turn",
    "final_text",
    "openai_tools",
]
