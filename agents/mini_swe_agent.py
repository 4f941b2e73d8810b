"""A swefleet trajectory as a mini-swe-agent trajectory (`trajectory_format: mini-swe-agent-1.1`,
what `minisweagent.agents.default.DefaultAgent.serialize` writes to `<instance_id>.traj.json`).

Messages: the system and instance prompts the scaffold rendered for the task, then per turn the
assistant's reply (decoded from its completion ids, stop token removed; `extra.actions` holds
the parsed command) and, when the turn had one, the observation as a user message
(`extra.returncode`); the last message has role `exit` with `extra.exit_status` and
`extra.submission` (the model patch). A chat trajectory (`agents.chat_record`) needs no
tokenizer: its prompts are the system and user messages it sent, its replies the `content` the
endpoint returned (native tool calls in `extra.tool_calls`); observations are user messages
there too, whichever role they were sent with. swefleet's token-level record stays in the swefleet file;
this export is for mini-swe-agent's tools (inspector, batch viewers) and other harnesses.
"""

from __future__ import annotations

from collections.abc import Callable

from swefleet.agents.chat_record import ChatTrajectory
from swefleet.agents.config import AgentConfig

from swefleet.types import EpisodeStatus, Task, Trajectory

FORMAT = "mini-swe-agent-1.1"

#: swefleet status -> mini-swe-agent exit_status (its exception names); others keep their name.
EXIT_STATUS = {
    EpisodeStatus.resolved: "Submitted",
    EpisodeStatus.unresolved: "Submitted",
    EpisodeStatus.limit_steps: "LimitsExceeded",
    EpisodeStatus.limit_tokens: "LimitsExceeded",
    EpisodeStatus.limit_time: "TimeExceeded",
    EpisodeStatus.format_errors: "RepeatedFormatError",
}


def to_mini_swe_agent(traj: Trajectory, task: Task, agent: AgentConfig,
                      decode: Callable[[list[int]], str] | None, model_name: str) -> dict:
    """The mini-swe-agent document of `traj`. `decode` turns completion ids into the reply text
    (`agents.chat.ChatML.completion_text`); it may be None for a chat trajectory and for an
    episode without turns (oracle, empty and predictions evals)."""
    chat = isinstance(traj, ChatTrajectory)
    if traj.turns and decode is None and not chat:
        raise ValueError(f"{traj.episode_id}: exporting turns needs the model's tokenizer")
    messages = _prompt_messages(traj, task, agent)
    for turn in traj.turns:
        text = (turn.reply.get("content") or "") if chat else decode(turn.completion_ids)
        messages.extend(_turn_messages(turn, text))
    exit_status = EXIT_STATUS.get(traj.status, traj.status.value)
    messages.append({"role": "exit", "content": traj.reason or exit_status,
                     "extra": {"exit_status": exit_status, "submission": traj.model_patch,
                               "swefleet_status": traj.status.value}})
    return {
        "info": {
            "model_stats": {"instance_cost": 0.0, "api_calls": len(traj.turns)},
            "config": {"agent": agent.model_dump(mode="json"),
                       "agent_type": "swefleet.agents.chat_loop.run_chat_episode" if chat
                       else "swefleet.agents.loop.run_episode",
                       "model": {"model_name": model_name}, "model_type": "swefleet"},
            "mini_version": "swefleet-export",
            "exit_status": exit_status,
            "submission": traj.model_patch,
            "swefleet": {"episode_id": traj.episode_id, "status": traj.status.value,
                         "reason": traj.reason, "reward": traj.reward, "timings": traj.timings,
                         "resolved": traj.status == EpisodeStatus.resolved},
        },
        "messages": messages,
        "trajectory_format": FORMAT,
        "instance_id": task.instance_id,
    }


def _prompt_messages(traj: Trajectory, task: Task, agent: AgentConfig) -> list[dict]:
    """The system and instance messages: those a chat trajectory sent, else the scaffold's."""
    if isinstance(traj, ChatTrajectory) and traj.turns:
        return [{"role": m["role"], "content": m.get("content") or ""}
                for m in traj.turns[0].messages]
    if isinstance(traj, ChatTrajectory):
        from swefleet.agents.chat_scaffolds import make_chat_scaffold as make
    else:
        from swefleet.agents.scaffolds import make_scaffold as make
    scaffold = make(agent)
    return [{"role": "system", "content": scaffold.system_prompt(task)},
            {"role": "user", "content": scaffold.instance_prompt(task)}]


def _turn_messages(turn, text: str) -> list[dict]:
    reply = {"role": "assistant", "content": text,
             "extra": {"actions": [{"command": turn.action}] if turn.action else [],
                       "cost": 0.0, "finish_reason": turn.finish_reason,
                       "policy_version": turn.policy_version, "latency_s": turn.latency_s}}
    if tool_calls := getattr(turn, "reply", {}).get("tool_calls"):
        reply["extra"]["tool_calls"] = tool_calls
    if not turn.observation:
        return [reply]
    observation = {"role": "user", "content": turn.observation,
                   "extra": {"returncode": turn.exit_code,
                             "timed_out": turn.action_timed_out}}
    if not turn.action:
        observation["extra"]["interrupt_type"] = "FormatError"
    return [reply, observation]


def predictions_entry(traj: Trajectory, model_name: str) -> dict:
    """One entry of mini-swe-agent's `preds.json` (keyed by instance id)."""
    return {"model_name_or_path": model_name, "instance_id": traj.task_id,
            "model_patch": traj.model_patch}
