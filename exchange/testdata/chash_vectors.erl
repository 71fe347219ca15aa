%% Prints the values exchange/erlhash_test.go pins: erlang:phash2 of the
%% terms the consistent-hash plugin hashes, and the bucket its jump hash
%% picks. Run: escript exchange/testdata/chash_vectors.erl
-module(chash_vectors).
-export([main/1]).

main(_) ->
    Bins = [<<>>, <<"a">>, <<"ab">>, <<"abc">>, <<"order-17">>, <<"0123456789a">>,
            <<"0123456789ab">>, <<"0123456789abc">>, <<"customer-1234567890-eu-west">>,
            <<"héllo"/utf8>>, <<255, 0, 128>>],
    [io:format("bin ~w ~b~n", [binary_to_list(B), erlang:phash2(B)]) || B <- Bins],
    Terms = [undefined,
             {longstr, <<"abc">>}, {signedint, 5}, {signedint, -5}, {signedint, 134217727},
             {signedint, -134217728}, {signedint, -134217729}, {long, 1 bsl 40},
             {long, -(1 bsl 40)}, {long, -(1 bsl 63)}, {long, (1 bsl 63) - 1},
             {timestamp, 18446744073709551615}, {timestamp, 1700000000},
             {double, 1.5}, {double, -0.0}, {double, 0.0}, {float, 0.25},
             {bool, true}, {bool, false}, {void, undefined}, {decimal, {2, 12345}},
             {decimal, {0, 4294967295}},
             {table, [{<<"a">>, longstr, <<"x">>}, {<<"b">>, signedint, 1}]}, {table, []},
             {array, [{longstr, <<"x">>}, {bool, false}]}, {array, []},
             {binary, <<1, 2, 3>>}, {unsignedbyte, 200}, {byte, -1}, {short, -300},
             {unsignedshort, 65535}, {unsignedint, 4294967295}],
    [io:format("term ~w ~b~n", [T, erlang:phash2(T)]) || T <- Terms],
    Keys = [<<"k", (integer_to_binary(I))/binary>> || I <- lists:seq(0, 19)],
    [io:format("jump ~s ~b ~b~n", [K, N, jump(erlang:phash2(K), N)])
     || K <- Keys, N <- [2, 3, 5, 16, 100, 1000, 1000000]],
    ok.

%% jump_consistent_hash as the plugin computes it.
jump(_K, 1) -> 0;
jump(K, N) -> jump(-1, 0, N, rand:seed_s(exs1024, {K, K, K})).
jump(B, J, N, _S) when J >= N -> B;
jump(_, J, N, S0) ->
    {R, S} = rand:uniform_s(S0),
    jump(J, trunc((J + 1) / R), N, S).
