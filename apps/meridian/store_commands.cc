// `meridian store migrate` and `meridian admin backup|restore`: flags, and the calls into the
// server module's whole-store operations.
#include <iostream>

#include "apps/meridian/commands.h"
#include "server/store_admin.h"

void AddStoreCommands(CLI::App& app, int* rc) {
  CLI::App* store = app.add_subcommand("store", "Move a server's state between stores");
  store->require_subcommand(1);
  static meridian::server::MigrateOptions m;
  CLI::App* migrate = store->add_subcommand(
      "migrate",
      "Copy an estate from SQLite into an empty PostgreSQL database, ids as they are (stop the "
      "server first)");
  migrate->add_option("--from", m.from, "sqlite:DIR, the stopped server's --data-dir")->required();
  migrate->add_option("--to", m.to, "postgresql://... (the URL `server --store` takes)")
      ->required();
  migrate->add_option("--batch", m.batch_rows, "rows a progress line (and an INSERT) stands for")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  migrate->callback([rc] {
    m.print = [](const std::string& line) { std::cout << line << std::endl; };
    const meridian::base::Status s = meridian::server::MigrateStore(m);
    *rc = s.ok() ? 0 : Fail(s);
  });

  CLI::App* admin = app.add_subcommand("admin", "Back up and restore a server's SQLite state");
  admin->require_subcommand(1);
  static std::string data_dir, file;
  CLI::App* backup = admin->add_subcommand(
      "backup", "Write a consistent copy of a data dir's database (safe while the server runs)");
  backup->add_option("--data", data_dir, "the server's --data-dir")->required();
  backup->add_option("--to", file, "the backup file to write (must not exist)")->required();
  backup->callback([rc] {
    const meridian::base::Status s = meridian::server::BackupSqlite(data_dir, file);
    if (s.ok()) std::cout << "backed up " << data_dir << "/meridian.db to " << file << "\n";
    *rc = s.ok() ? 0 : Fail(s);
  });
  CLI::App* restore = admin->add_subcommand(
      "restore", "Replace a data dir's database with a backup (stop the server first)");
  restore->add_option("--from", file, "the backup file")->required();
  restore->add_option("--data", data_dir, "the server's --data-dir (created when missing)")
      ->required();
  restore->callback([rc] {
    const meridian::base::Status s = meridian::server::RestoreSqlite(file, data_dir);
    if (s.ok()) std::cout << "restored " << file << " into " << data_dir << "/meridian.db\n";
    *rc = s.ok() ? 0 : Fail(s);
  });
}
