from __future__ import annotations

from django.db import migrations


def seed(apps, schema_editor):  # type: ignore[no-untyped-def]
    from telemetry_app.pricing import price_rows_from_file

    ModelPrice = apps.get_model("telemetry_app", "ModelPrice")
    for row in price_rows_from_file():
        ModelPrice.objects.update_or_create(
            model=row["model"], effective_date=row["effective_date"], defaults=row
        )


class Migration(migrations.Migration):
    dependencies = [("telemetry_app", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
