from symgrad.cli import main

raise SystemExit(main())
