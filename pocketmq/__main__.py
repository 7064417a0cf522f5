from pocketmq.cli import main

raise SystemExit(main())
