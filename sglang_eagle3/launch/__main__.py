from sglang_eagle3.launch.cli import main

raise SystemExit(main())
