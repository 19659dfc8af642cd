from sglang_eagle3.bench.cli import main

raise SystemExit(main())
