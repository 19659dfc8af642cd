"""SGLang 0.5.23's real ModelRunner in this process, set up as sglang.benchmark.one_batch does
(the scripts here replace its correctness test with their own `work`)."""

import sglang.benchmark.one_batch as ob


def load_runner(server_args, port_args, gpu_id, tp_rank):
    """one_batch's runner wrapper (``.extend``/``.decode``; ``.torch_runner``: the
    ModelRunner) for this scheduler rank."""
    ob.publish(
        server_args,
        role="scheduler",
        ranks=ob.SpawnRanks(
            world_rank=ob.spawn_world_rank(server_args, tp_rank=tp_rank, pp_rank=0),
            gpu_id=gpu_id,
        ),
    )
    ob._init_process_global_configs()
    runner, _tokenizer = ob.load_model(server_args, port_args, gpu_id, tp_rank)
    return runner


def draft_extend_batch(runner, data):
    """The drafter's first step as SGLang's EAGLE worker runs it: one extend per request of
    ``data`` ((input ids, fc input [L, num_aux * target_hidden]) pairs), the taps packed in
    ``forward_batch.spec_info.hidden_states`` in request order. Returns the ForwardBatch."""
    import types

    import torch

    params = ob.SamplingParams(temperature=0, max_new_tokens=1)
    reqs = []
    for i, (ids, _hs) in enumerate(data):
        req = ob.Req(rid=i, origin_input_text="", origin_input_ids=ob.array("q", ids),
                     sampling_params=params)  # fmt: skip
        req.full_untruncated_fill_ids = req.origin_input_ids
        req.logprob_start_len = -1
        req.extend_end = len(ids)
        reqs.append(req)
    tree = ob.TreeCacheNamespace(
        page_size=ob.get_schedule().page_size,
        device=runner.device,
        token_to_kv_pool_allocator=runner.token_to_kv_pool_allocator,
    )
    batch = ob.ScheduleBatch.init_new(
        reqs=reqs,
        req_to_token_pool=runner.req_to_token_pool,
        token_to_kv_pool_allocator=runner.token_to_kv_pool_allocator,
        tree_cache=tree,
        model_config=runner.model_config,
        enable_overlap=False,
        spec_algorithm=ob.SpeculativeAlgorithm.NONE,
    )
    batch.prepare_for_extend()
    if batch.input_ids is None and getattr(batch, "prefill_input_ids_cpu", None) is not None:
        batch.input_ids = batch.prefill_input_ids_cpu
    fb = ob.ForwardBatch.init_new(batch, runner, return_hidden_states_before_norm=False)
    fb.spec_info = types.SimpleNamespace(hidden_states=torch.cat([hs for _, hs in data]))
    return fb


def run_first_draft_step(work, model_path: str, tokenizer_path: str, requests: int) -> None:
    """Run ``work(server_args, port_args, bench_args, gpu_id, tp_rank)`` in one_batch's place
    of its correctness test, on ``model_path`` (a draft, loaded as SGLang's own model) on CPU,
    fp32, for a batch of ``requests``."""
    from sglang.srt.server_args import ServerArgs

    ob.correctness_test = work
    server_args = ServerArgs(
        model_path=model_path, device="cpu", dtype="float32", attention_backend="torch_native",
        cuda_graph_backend_decode="disabled", cuda_graph_backend_prefill="disabled",
        mem_fraction_static=0.1, max_total_tokens=2048, chunked_prefill_size=512,
        disable_radix_cache=True, tokenizer_path=tokenizer_path,
    )  # fmt: skip
    ob.main(server_args, ob.BenchArgs(batch_size=(requests,), correctness_test=True))
