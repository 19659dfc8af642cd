from sglang_eagle3.doctor.cli import main

raise SystemExit(main())
