"""`commbench export RESULTS... --openmetrics FILE | --push URL`: results as Prometheus metrics, a
node_exporter textfile or a Pushgateway push (analysis/export/metrics.py; docs/METRICS.md). Reads results
files and never starts ranks or imports torch."""

from __future__ import annotations

import sys

import click

from commbench.cli.options import check_text
from commbench.core.errors import EXIT_OK, BadInput


@click.command()
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option("--openmetrics", "textfile", default=None, metavar="FILE",
              help="Write the metrics to FILE (replaced atomically), e.g. node_exporter's "
                   "textfile directory: /var/lib/node_exporter/textfile_collector/commbench.prom.")
@click.option("--push", "url", default=None, metavar="URL",
              help="Push the metrics to a Prometheus Pushgateway, e.g. http://pushgateway:9091.")
@click.option("--job", default="commbench", show_default=True, help="The Pushgateway job the push replaces.")
def export(results, textfile, url, job) -> int:
    """Export the latest busbw per collective and size bucket, the pairs host verdicts and links,
    and the wire trouble counters of results (files or folders) as Prometheus metrics, with labels
    that stay bounded however many runs are read (docs/METRICS.md).

    Exit 0: written; 2: bad input; 3: the Pushgateway did not answer.
    """
    from commbench.analysis.export import metrics, pushgateway

    if (textfile is None) == (url is None):
        raise BadInput("export needs one of --openmetrics FILE or --push URL: pass one, e.g. "
                       "'commbench export results/ --openmetrics commbench.prom'")
    job = check_text(job, "--job", most=64)
    if not job or "/" in job:
        raise BadInput(f"--job {job!r} is not a job name: pass a name without '/', e.g. commbench")
    if url is not None:
        target = pushgateway.check_push_url(url)  # before reading anything
    if textfile is not None:
        from commbench.core.outputs import check_new

        check_new(textfile, "export", "--openmetrics", inputs=results, force=True)  # before reading anything
    found = metrics.collect(results)
    for line in found.warnings():  # a family over the most series it holds: said once
        sys.stderr.write(f"commbench: warning: {line}\n")
    if textfile is not None:
        path = metrics.write_textfile(found, textfile, inputs=results)
        sys.stdout.write(f"metrics: {len(found.names())} metrics written to {path}\n")
    else:
        metrics.push(found, url, job)
        sys.stdout.write(f"metrics: {len(found.names())} metrics pushed to {target.shown} (job {job})\n")
    return EXIT_OK
