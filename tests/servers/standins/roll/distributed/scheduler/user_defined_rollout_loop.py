# SPDX-License-Identifier: MIT
"""Stand-in of roll/distributed/scheduler/user_defined_rollout_loop.py at
ROLL 8eb27cc: `postprocess_output_data(request, data, sequence_length)`
makes one response row from a request and an engine's answer
(`data.meta_info`: output_token_ids, pad_token_id), the response padded
with the pad token to sequence_length - prompt length, the request's
columns and meta_info carried over; `UserDefinedRolloutLoop` is ROLL's
default loop, which the stand-in only records being asked."""
import torch

from .protocol import DataProto

default_loop_calls = []


def postprocess_output_data(request, data, sequence_length):
    prompts = request.batch.pop("init_input_ids", request.batch["input_ids"])
    (out,) = data.meta_info["output_token_ids"]
    pad = data.meta_info["pad_token_id"]
    width = sequence_length - prompts.shape[1]
    responses = torch.full((1, width), pad, dtype=torch.long)
    responses[0, :len(out)] = torch.tensor(out[:width], dtype=torch.long)
    mask = request.batch["attention_mask"]
    return DataProto(
        {"prompts": prompts, "responses": responses,
         "input_ids": torch.cat([prompts, responses], dim=1),
         "attention_mask": torch.cat([mask, responses != pad], dim=1).long(),
         "response_mask": (responses != pad).long()},
        dict(request.non_tensor_batch), dict(request.meta_info))


class UserDefinedRolloutLoop:
    async def process_new_prompt(self, context):
        default_loop_calls.append(context)
        return ["ROLL's own loop"]
