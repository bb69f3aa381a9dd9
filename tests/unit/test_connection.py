import os
import socket

from mysqlprobe.collectors.perfschema import connection
from mysqlprobe.collectors.perfschema.settings import deltas


def test_listening_unix_socket_of_a_process_is_found(tmp_path):
    path = str(tmp_path / "mysqld.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    client_side = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # not listening: not found
    try:
        assert path in connection.listening_sockets(os.getpid())
    finally:
        server.close()
        client_side.close()
    assert path not in connection.listening_sockets(os.getpid())


def test_option_file_and_resolution(tmp_path):
    cnf = tmp_path / "my.cnf"
    cnf.write_text("[mysqld]\nuser=mysql\n[client]\nuser = probe\npassword = 's3cret'\nsocket=/run/x.sock\n")
    args = connection.resolve(os.getpid(), connection.ConnectOptions(defaults_file=str(cnf)))
    assert args["user"] == "probe" and args["password"] == "s3cret" and args["unix_socket"] == "/run/x.sock"
    assert "s3cret" not in connection.describe(args)
    pw = tmp_path / "pw"
    pw.write_text("other\n")
    args = connection.resolve(os.getpid(), connection.ConnectOptions(user="u", password_file=str(pw),
                                                                      host="127.0.0.1", port=3307))
    assert (args["user"], args["password"], args["host"], args["port"]) == ("u", "other", "127.0.0.1", 3307)


def test_tls_is_left_to_the_server_over_tcp_and_off_on_a_local_socket():
    over_tcp = connection.resolve(os.getpid(), connection.ConnectOptions(host="127.0.0.1", port=3307))
    assert "ssl_disabled" not in over_tcp   # PyMySQL's default: TLS where the server offers it
    local = connection.resolve(os.getpid(), connection.ConnectOptions(socket="/run/x.sock"))
    assert local["ssl_disabled"] is True


def test_connect_failure_is_a_reason_not_an_exception(tmp_path):
    conn, _, why = connection.connect(os.getpid(), connection.ConnectOptions(socket=str(tmp_path / "none.sock")))
    assert conn is None and "cannot connect as root@" in why


def test_summary_deltas_keep_what_moved():
    before = {"stages": {"stage/sql/Sending data": {"values": [5, 100]}, "stage/sql/init": {"values": [1, 2]}},
              "status": {"Handler_write": 10}}
    after = {"stages": {"stage/sql/Sending data": {"values": [7, 400]}, "stage/sql/init": {"values": [1, 2]},
                        "stage/sql/end": {"values": [1, 5]}},
             "status": {"Handler_write": 10017}}
    d = deltas(before, after)
    assert d["stages"] == [{"name": "stage/sql/Sending data", "count": 2, "timer_ps": 300},
                           {"name": "stage/sql/end", "count": 1, "timer_ps": 5}]
    assert d["status"] == {"Handler_write": 10007}
