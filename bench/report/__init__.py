"""The tiering benchmark's report (bench/report.py runs it): the modules, in the order of
the data: inputs, metrics, mode, runs, table, write, cli."""

from .inputs import (  # noqa: F401
    PAGE,
    MIB,
    MODE_TITLES,
    DRAM_NODE,
    CXL_NODE,
    read_events,
    pick,
    first,
)
from .metrics import (  # noqa: F401
    expand_runs,
    parse_truth_csv,
    demotion_score,
    counter_delta,
    migration_rates,
    cpu_seconds,
    series_share,
    read_nodes_window,
    dram_read_share,
    cxl_read_split,
)
from .mode import (  # noqa: F401
    AGENT_CPU,
    EXCLUDED_CPU,
    oracle_cold_check,
    analyse_mode,
    workload_price,
    loop_phases,
    move_cpu_share,
    kvtierd_own_cpu,
    promotion_latency,
)
from .runs import (  # noqa: F401
    figures,
    per_step,
    spread,
    aggregate,
    paired_figures,
    ratio_of,
    oracle_comparison,
    none_comparison,
)
from .table import (  # noqa: F401
    COLUMNS,
    pct,
    num,
    stat,
    signed_pts,
    table_row,
    markdown_table,
    one_line,
)
from .write import (  # noqa: F401
    plot,
    first_runs,
    run_context,
    guest_cpus,
    settings_md,
    price_md,
    details_md,
    runs_md,
    fmt_nodes,
    layout_warning,
    write_report,
)
from .cli import (  # noqa: F401
    load_mode,
    main,
)
