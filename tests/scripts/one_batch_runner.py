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
