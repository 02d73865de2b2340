"""Workloads: datasets of (prompt, output) lengths, arrival processes, recorded traces, and the
Trace the simulator replays. Importing this needs only numpy (pandas for date-time traces,
matplotlib for plots, and the `data` extra to tokenize datasets are imported when used).
"""
from .arrivals import ARRIVALS, constant, exponential, gamma, poisson_quanta
from .chatbot import ChatbotCuts, ChatbotRequests, chatbot_requests
from .config import WorkloadConfig, build_trace
from .conversations import Conversations, load_conversations, read_conversations_csv
from .lengths import DATASET_NAMES, LengthTable, load_lengths, read_lengths_csv
from .recorded import Replay, load_recorded, read_recorded_trace
from .standin import FIG11_MEANS, STAND_INS, StandIn
from .trace import Trace, write_trace_csv

__all__ = [
    "ARRIVALS", "DATASET_NAMES", "FIG11_MEANS", "STAND_INS", "ChatbotCuts", "ChatbotRequests", "Conversations",
    "LengthTable", "Replay", "StandIn", "Trace", "WorkloadConfig", "build_trace", "chatbot_requests", "constant",
    "exponential", "gamma", "load_conversations", "load_lengths", "load_recorded", "poisson_quanta",
    "read_conversations_csv", "read_lengths_csv", "read_recorded_trace", "write_trace_csv",
]
